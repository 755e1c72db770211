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

# moekit_cutlass_sources(<list var>): CUTLASS translation units are named *_cutlass.cu. Without the
# headers they are dropped from the list (the library still builds; their launchers report that
# CUTLASS is missing at run time). With them, they always compile with -DNDEBUG (CUTLASS's device
# asserts cost registers and time).
function(moekit_cutlass_sources var)
  set(_srcs ${${var}})
  set(_cutlass_tus ${_srcs})
  list(FILTER _cutlass_tus INCLUDE REGEX "_cutlass\\.cu$")
  if(MOEKIT_WITH_CUTLASS)
    set_source_files_properties(${_cutlass_tus} DIRECTORY ${PROJECT_SOURCE_DIR}
                                PROPERTIES COMPILE_DEFINITIONS NDEBUG)
  else()
    list(FILTER _srcs EXCLUDE REGEX "_cutlass\\.cu$")
  endif()
  set(${var} ${_srcs} PARENT_SCOPE)
endfunction()
