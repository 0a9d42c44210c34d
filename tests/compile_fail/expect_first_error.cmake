# Builds TARGET in BUILD, which must fail, and requires the *first* error line of the compiler's
# output to match REGEX: the library's own message comes before anything deeper.
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD} --target ${TARGET}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${TARGET} compiled, but it must not")
endif()
# ERROR_LINE: the line that carries the error, if not the first with "error:" (a linker names the
# missing symbol in an "undefined reference" line before its summary)
if(NOT ERROR_LINE)
  set(ERROR_LINE "error:")
endif()
string(REGEX MATCH "[^\n]*${ERROR_LINE}[^\n]*" first "${out}\n${err}")
if(NOT first MATCHES "${REGEX}")
  message(FATAL_ERROR "${TARGET}: the first error is not the expected one.\n  first:  ${first}\n  wanted: ${REGEX}")
endif()
message(STATUS "${TARGET}: first error as expected: ${first}")
