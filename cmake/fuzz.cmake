# Fuzz targets, one per parser of untrusted bytes, laid out the same way in every folder that has
# them (sandboxd/fuzz, kube/fuzz, controller/fuzz): fuzz_<name>.c defines LLVMFuzzerTestOneInput
# and corpus/<name>/ holds its committed inputs.
#
# With any compiler each target is linked with common/fuzz/fuzz_main.c into fuzz_<name>_replay,
# which CTest runs over the corpus (test fuzz_<name>_corpus, label fuzz). With clang and
# SANDBOXD_FUZZ=ON the real libFuzzer binary fuzz_<name> is built too, over copies of the
# libraries instrumented for coverage (scripts/fuzz.sh runs it).
option(SANDBOXD_FUZZ "Build libFuzzer binaries (clang only)" OFF)
if(SANDBOXD_FUZZ AND NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "SANDBOXD_FUZZ needs clang (CC=clang), not ${CMAKE_C_COMPILER_ID}")
endif()
set(SBX_FUZZ_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
set(SBX_FUZZ_MAIN_DIR ${PROJECT_SOURCE_DIR}/common/fuzz) # fuzz_main.c, fuzz_check.h

# sbx_fuzz_library(LIB DEP...): with SANDBOXD_FUZZ, LIB_fuzz: LIB again from its sources, with
# coverage for libFuzzer to steer by, its include directories and definitions, linked to DEP.
function(sbx_fuzz_library lib)
  if(NOT SANDBOXD_FUZZ)
    return()
  endif()
  get_target_property(relative ${lib} SOURCES)
  get_target_property(dir ${lib} SOURCE_DIR)
  set(sources "")
  foreach(s IN LISTS relative) # generated sources (the page's assets) come with their path
    if(IS_ABSOLUTE "${s}")
      list(APPEND sources "${s}")
    else()
      list(APPEND sources "${dir}/${s}")
    endif()
  endforeach()
  add_library(${lib}_fuzz STATIC ${sources})
  foreach(p INCLUDE_DIRECTORIES COMPILE_DEFINITIONS)
    get_target_property(public ${lib} INTERFACE_${p})
    get_target_property(private ${lib} ${p})
    foreach(v public private)
      if(NOT ${v})
        set(${v} "")
      endif()
    endforeach()
    if(p STREQUAL "INCLUDE_DIRECTORIES")
      target_include_directories(${lib}_fuzz PUBLIC ${public} PRIVATE ${private})
    else()
      target_compile_definitions(${lib}_fuzz PUBLIC ${public} PRIVATE ${private})
    endif()
  endforeach()
  target_compile_options(${lib}_fuzz PRIVATE ${SBX_WARNINGS} -fsanitize=fuzzer-no-link
                         ${SBX_FUZZ_FLAGS})
  target_link_libraries(${lib}_fuzz PUBLIC ${ARGN})
endfunction()

# sbx_fuzz_targets(LIB [DIR D] [EXTRA SRC...] NAMES NAME...): for each NAME (source
# [D/]fuzz_NAME.c, corpus corpus/NAME/ in the calling folder), fuzz_NAME_replay linked to LIB
# with its corpus test and, with SANDBOXD_FUZZ, fuzz_NAME linked to LIB_fuzz; EXTRA sources
# (relative to the calling folder) go into both.
function(sbx_fuzz_targets lib)
  cmake_parse_arguments(ARG "" "DIR" "EXTRA;NAMES" ${ARGN})
  set(dir ${CMAKE_CURRENT_SOURCE_DIR})
  if(ARG_DIR)
    set(dir ${dir}/${ARG_DIR})
  endif()
  list(TRANSFORM ARG_EXTRA PREPEND ${CMAKE_CURRENT_SOURCE_DIR}/)
  foreach(t ${ARG_NAMES})
    add_executable(fuzz_${t}_replay ${dir}/fuzz_${t}.c ${SBX_FUZZ_MAIN_DIR}/fuzz_main.c
                                    ${ARG_EXTRA})
    target_compile_options(fuzz_${t}_replay PRIVATE ${SBX_WARNINGS})
    target_include_directories(fuzz_${t}_replay PRIVATE ${SBX_FUZZ_MAIN_DIR}
                                                        ${CMAKE_CURRENT_SOURCE_DIR})
    target_link_libraries(fuzz_${t}_replay PRIVATE ${lib})
    add_test(NAME fuzz_${t}_corpus
             COMMAND fuzz_${t}_replay ${CMAKE_CURRENT_SOURCE_DIR}/corpus/${t})
    set_tests_properties(fuzz_${t}_corpus PROPERTIES TIMEOUT 120 LABELS fuzz)

    if(SANDBOXD_FUZZ)
      add_executable(fuzz_${t} ${dir}/fuzz_${t}.c ${ARG_EXTRA})
      target_include_directories(fuzz_${t} PRIVATE ${SBX_FUZZ_MAIN_DIR}
                                                   ${CMAKE_CURRENT_SOURCE_DIR})
      target_compile_options(fuzz_${t} PRIVATE ${SBX_WARNINGS} -fsanitize=fuzzer
                             ${SBX_FUZZ_FLAGS})
      target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer ${SBX_FUZZ_FLAGS})
      target_link_libraries(fuzz_${t} PRIVATE ${lib}_fuzz)
    endif()
  endforeach()
endfunction()
