# Locate the CUTLASS C++ headers for the Hopper (sm_90a) GEMM kernels.
#
# Order: -DPYQUANT_CUTLASS_DIR / $PYQUANT_CUTLASS_DIR (a CUTLASS include/ folder), the cache in
# .deps/cutlass/include, an installed PyPI nvidia-cutlass (cutlass_library/source/include), and
# finally tools/fetch_cutlass.sh (downloads that wheel, headers only). Without CUTLASS the library
# still builds: the Hopper paths are left out and the mma.sync kernels serve every GPU.
# Sets PYQUANT_CUTLASS_DIR (or leaves it empty).
set(PYQUANT_CUTLASS_VERSION "4.2.0.0" CACHE STRING "nvidia-cutlass version fetched when no CUTLASS is found")
if(NOT PYQUANT_CUTLASS_DIR AND DEFINED ENV{PYQUANT_CUTLASS_DIR})
  set(PYQUANT_CUTLASS_DIR "$ENV{PYQUANT_CUTLASS_DIR}")
endif()
set(_cutlass_cache "${CMAKE_CURRENT_SOURCE_DIR}/.deps/cutlass")
if(NOT PYQUANT_CUTLASS_DIR AND EXISTS "${_cutlass_cache}/include/cutlass/cutlass.h")
  set(PYQUANT_CUTLASS_DIR "${_cutlass_cache}/include")
endif()
find_package(Python3 COMPONENTS Interpreter QUIET)
if(NOT PYQUANT_CUTLASS_DIR AND Python3_Interpreter_FOUND)
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -c
      "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))"
    OUTPUT_VARIABLE _cl_inc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND EXISTS "${_cl_inc}/cutlass/cutlass.h")
    set(PYQUANT_CUTLASS_DIR "${_cl_inc}")
  endif()
endif()
if(NOT PYQUANT_CUTLASS_DIR AND Python3_Interpreter_FOUND AND NOT PYQUANT_NO_FETCH)
  message(STATUS "pyquant: fetching CUTLASS ${PYQUANT_CUTLASS_VERSION} headers (PyPI nvidia-cutlass) into ${_cutlass_cache}")
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E env PYTHON=${Python3_EXECUTABLE}
      bash "${CMAKE_CURRENT_SOURCE_DIR}/tools/fetch_cutlass.sh" "${_cutlass_cache}" "${PYQUANT_CUTLASS_VERSION}"
    RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND EXISTS "${_cutlass_cache}/include/cutlass/cutlass.h")
    set(PYQUANT_CUTLASS_DIR "${_cutlass_cache}/include")
  endif()
endif()
if(PYQUANT_CUTLASS_DIR AND NOT EXISTS "${PYQUANT_CUTLASS_DIR}/cutlass/cutlass.h")
  message(FATAL_ERROR "PYQUANT_CUTLASS_DIR=${PYQUANT_CUTLASS_DIR} holds no cutlass/cutlass.h (it must be CUTLASS's include/ folder)")
endif()
if(PYQUANT_CUTLASS_DIR)
  message(STATUS "pyquant: CUTLASS headers ${PYQUANT_CUTLASS_DIR}")
else()
  message(WARNING "pyquant: no CUTLASS headers found (set PYQUANT_CUTLASS_DIR); building without the sm_90a GEMM kernels")
endif()
