# Communication engines of expert parallelism (docs/expert_parallel.md).
#   MPI:  Debian libopenmpi-dev (find_package(MPI), the C API). CPU ranks, and the bootstrap
#         of NCCL (rank, size, unique id) under mpirun.
#   NCCL: PyPI nvidia-nccl-cu13, pip-installed --no-deps into .deps/nccl by scripts/install_deps.sh
#         (headers and libnccl.so.2 from that wheel, never the toolkit's copy, so that CI and every
#         developer build against the same NCCL). CUDA builds only.
# Each is AUTO (used when found), ON (required) or OFF. Results: MOEKIT_HAVE_MPI, MOEKIT_HAVE_NCCL
# and, with NCCL, the imported target moekit_nccl.
set(MOEKIT_HAVE_MPI OFF)
if(NOT MOEKIT_WITH_MPI STREQUAL "OFF")
  # The C API through the CXX component (the project enables C++ only); no MPI C++ bindings.
  set(MPI_CXX_SKIP_MPICXX ON)
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND)
    set(MOEKIT_HAVE_MPI ON)
  elseif(MOEKIT_WITH_MPI STREQUAL "ON")
    message(FATAL_ERROR "MOEKIT_WITH_MPI=ON but MPI was not found (apt-get install libopenmpi-dev "
                        "openmpi-bin, or run scripts/install_deps.sh)")
  endif()
endif()
message(STATUS "moekit: MPI communicator ${MOEKIT_HAVE_MPI}")

set(MOEKIT_NCCL_ROOT "${PROJECT_SOURCE_DIR}/.deps/nccl" CACHE PATH "Where nvidia-nccl-cu13 was pip-installed")
set(MOEKIT_HAVE_NCCL OFF)
if(MOEKIT_WITH_CUDA AND NOT MOEKIT_WITH_NCCL STREQUAL "OFF")
  set(_nccl_inc "${MOEKIT_NCCL_ROOT}/nvidia/nccl/include")
  set(_nccl_lib "${MOEKIT_NCCL_ROOT}/nvidia/nccl/lib/libnccl.so.2")
  if(EXISTS "${_nccl_inc}/nccl.h" AND EXISTS "${_nccl_lib}")
    add_library(moekit_nccl SHARED IMPORTED GLOBAL)
    set_target_properties(moekit_nccl PROPERTIES IMPORTED_LOCATION "${_nccl_lib}"
                                                 IMPORTED_NO_SONAME OFF
                                                 INTERFACE_INCLUDE_DIRECTORIES "${_nccl_inc}")
    set(MOEKIT_HAVE_NCCL ON)
    set(MOEKIT_NCCL_LIBRARY "${_nccl_lib}")  # for the installed package's config
    message(STATUS "moekit: NCCL from ${MOEKIT_NCCL_ROOT}")
  elseif(MOEKIT_WITH_NCCL STREQUAL "ON")
    message(FATAL_ERROR "MOEKIT_WITH_NCCL=ON but ${_nccl_inc}/nccl.h or ${_nccl_lib} is missing "
                        "(run scripts/install_deps.sh)")
  endif()
elseif(MOEKIT_WITH_NCCL STREQUAL "ON")
  message(FATAL_ERROR "MOEKIT_WITH_NCCL=ON needs the CUDA backend (MOEKIT_CUDA)")
endif()
message(STATUS "moekit: NCCL communicator ${MOEKIT_HAVE_NCCL}")
