# CUTLASS/CuTe headers come from PyPI `nvidia-cutlass` (installed --no-deps into .deps/ by
# scripts/install_deps.sh). They are optional: kernels that need them are compiled only when found.
set(MOEKIT_CUTLASS_ROOT "${PROJECT_SOURCE_DIR}/.deps/cutlass" CACHE PATH "Where nvidia-cutlass was pip-installed")
set(_cutlass_inc "${MOEKIT_CUTLASS_ROOT}/cutlass_library/source/include")
set(_cutlass_util "${MOEKIT_CUTLASS_ROOT}/cutlass_library/source/tools/util/include")
if(EXISTS "${_cutlass_inc}/cutlass/cutlass.h")
  set(MOEKIT_CUTLASS_INCLUDE_DIRS "${_cutlass_inc}" "${_cutlass_util}")
  set(MOEKIT_WITH_CUTLASS ON)
  message(STATUS "moekit: CUTLASS headers at ${_cutlass_inc}")
else()
  set(MOEKIT_CUTLASS_INCLUDE_DIRS "")
  set(MOEKIT_WITH_CUTLASS OFF)
  message(STATUS "moekit: CUTLASS headers not found (run scripts/install_deps.sh)")
endif()
