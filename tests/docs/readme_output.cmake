# SPDX-License-Identifier: Apache-2.0
# cmake -D README=... -D PROGRAM=... -P readme_output.cmake
# Runs the README's usage example and compares what it prints with the ```text block that follows
# "It prints" in the README, line for line.
file(READ "${README}" readme)
string(FIND "${readme}" "It prints" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md: no 'It prints' paragraph after the usage example")
endif()
string(SUBSTRING "${readme}" ${at} -1 rest)
string(FIND "${rest}" "```text\n" open)
if(open EQUAL -1)
  message(FATAL_ERROR "README.md: no ```text block after 'It prints'")
endif()
math(EXPR open "${open} + 8")
string(SUBSTRING "${rest}" ${open} -1 rest)
string(FIND "${rest}" "```" close)
string(SUBSTRING "${rest}" 0 ${close} expected)

execute_process(COMMAND "${PROGRAM}" OUTPUT_VARIABLE printed RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the README example exited with ${rc}")
endif()
if(NOT printed STREQUAL expected)
  message(FATAL_ERROR "the README example printed\n${printed}\nbut README.md says\n${expected}")
endif()
message(STATUS "the README example prints what README.md says")
