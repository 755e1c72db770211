from . import _C
