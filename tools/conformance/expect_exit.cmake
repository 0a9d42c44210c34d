# cmake -DEXE=<xattn-conformance> -DDIR=<dir> -DRC=<status> -DREGEX=<regex> -P expect_exit.cmake
# CTest can only tell zero from non-zero exit; this checks the exact status and output.
execute_process(COMMAND "${EXE}" "${DIR}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("stdout:\n${out}stderr:\n${err}")
if(NOT rc STREQUAL RC)
  message(FATAL_ERROR "exit status ${rc}, expected ${RC}")
endif()
if(NOT "${out}${err}" MATCHES "${REGEX}")
  message(FATAL_ERROR "output does not match: ${REGEX}")
endif()
