# cmake -DSRC=<good case> -DSRC_OTHER=<another case> -DOUT=<dir> -P make_bad_cases.cmake
# Derives one broken case per failure mode from a good Softmax case (shape [1,3]).
file(REMOVE_RECURSE "${OUT}")
file(READ "${SRC}/case.json" json)

function(make_case name)
  file(MAKE_DIRECTORY "${OUT}/${name}")
  file(COPY "${SRC}/input_0.bin" "${SRC}/output_0.bin" DESTINATION "${OUT}/${name}")
endfunction()

make_case(missing_case_json)

make_case(missing_file)
file(WRITE "${OUT}/missing_file/case.json" "${json}")
file(REMOVE "${OUT}/missing_file/input_0.bin")

make_case(wrong_size)   # a 32-byte file where 12 bytes are declared
file(WRITE "${OUT}/wrong_size/case.json" "${json}")
file(COPY_FILE "${SRC_OTHER}/input_0.bin" "${OUT}/wrong_size/input_0.bin")

make_case(unknown_dtype)
string(REPLACE "\"float32\"" "\"float99\"" bad "${json}")
file(WRITE "${OUT}/unknown_dtype/case.json" "${bad}")

make_case(unknown_attribute)
string(REPLACE "\"attributes\": {}" "\"attributes\": {\"bogus\": 1}" bad "${json}")
string(REPLACE "\"attribute_types\": {}" "\"attribute_types\": {\"bogus\": \"int\"}" bad "${bad}")
file(WRITE "${OUT}/unknown_attribute/case.json" "${bad}")

make_case(bad_json)
string(SUBSTRING "${json}" 0 100 bad)
file(WRITE "${OUT}/bad_json/case.json" "${bad}")

make_case(wrong_values) # well-formed, but the expected output is the input itself
file(WRITE "${OUT}/wrong_values/case.json" "${json}")
file(COPY_FILE "${SRC}/input_0.bin" "${OUT}/wrong_values/output_0.bin")

# Guard against silent no-ops if the source case.json ever changes its spelling.
foreach(dir unknown_dtype unknown_attribute)
  file(READ "${OUT}/${dir}/case.json" check)
  if(check STREQUAL json)
    message(FATAL_ERROR "make_bad_cases: could not derive '${dir}' from ${SRC}/case.json")
  endif()
endforeach()
