# Locate ONNX Runtime's C/C++ API headers (we use only those: ORT hands its API table to
# RegisterCustomOps, so the library links neither libonnxruntime nor torch).
#
# Order: -DONNXRUNTIME_INCLUDE_DIR / $ONNXRUNTIME_INCLUDE_DIR, an installed dev package
# (/usr/include/onnxruntime, /usr/local/include/onnxruntime), the cache in .deps/, and finally
# tools/fetch_ort_headers.sh on a Debian-like machine (Debian's libonnxruntime-dev).
if(NOT ONNXRUNTIME_INCLUDE_DIR AND DEFINED ENV{ONNXRUNTIME_INCLUDE_DIR})
  set(ONNXRUNTIME_INCLUDE_DIR "$ENV{ONNXRUNTIME_INCLUDE_DIR}")
endif()
set(_ort_cache "${CMAKE_CURRENT_SOURCE_DIR}/.deps/onnxruntime")
if(NOT ONNXRUNTIME_INCLUDE_DIR)
  find_path(_ort_found onnxruntime_c_api.h
    PATHS /usr/include/onnxruntime /usr/local/include/onnxruntime "${_ort_cache}/include"
    NO_CACHE)
  if(_ort_found)
    set(ONNXRUNTIME_INCLUDE_DIR "${_ort_found}")
  endif()
endif()
if(NOT ONNXRUNTIME_INCLUDE_DIR)
  find_program(_apt apt-get)
  if(_apt)
    message(STATUS "pyquant: no ONNX Runtime headers found; fetching Debian's libonnxruntime-dev headers into ${_ort_cache}")
    execute_process(
      COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/tools/fetch_ort_headers.sh" "${_ort_cache}"
      RESULT_VARIABLE _rc)
    if(_rc EQUAL 0)
      set(ONNXRUNTIME_INCLUDE_DIR "${_ort_cache}/include")
    endif()
  endif()
endif()
if(NOT ONNXRUNTIME_INCLUDE_DIR OR NOT EXISTS "${ONNXRUNTIME_INCLUDE_DIR}/onnxruntime_c_api.h")
  message(FATAL_ERROR
    "pyquant needs ONNX Runtime's C API headers (onnxruntime_c_api.h), version 1.20 or newer.\n"
    "Download any ONNX Runtime release archive (onnxruntime-linux-x64-<ver>.tgz) and pass its include/ folder:\n"
    "  ONNXRUNTIME_INCLUDE_DIR=/path/to/onnxruntime-<ver>/include pip install .\n"
    "or install your distribution's ONNX Runtime dev package (Debian: libonnxruntime-dev).")
endif()
file(STRINGS "${ONNXRUNTIME_INCLUDE_DIR}/onnxruntime_c_api.h" _ort_ver REGEX "^#define ORT_API_VERSION [0-9]+")
string(REGEX REPLACE "^#define ORT_API_VERSION ([0-9]+)" "\\1" ONNXRUNTIME_HEADERS_VERSION "${_ort_ver}")
if(ONNXRUNTIME_HEADERS_VERSION LESS 20)
  message(FATAL_ERROR "ONNX Runtime headers in ${ONNXRUNTIME_INCLUDE_DIR} are API ${ONNXRUNTIME_HEADERS_VERSION}; pyquant needs 20 (ORT 1.20) or newer")
endif()
message(STATUS "pyquant: ONNX Runtime headers ${ONNXRUNTIME_INCLUDE_DIR} (API ${ONNXRUNTIME_HEADERS_VERSION}; the library asks ORT for API 20)")
