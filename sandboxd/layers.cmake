# The rule that makes the tree the architecture: sandboxd's core (src/core) knows nothing of the
# wire. A core source that includes a header of gRPC, protobuf-c, libmicrohttpd or jansson, or a
# header of an adapter (src/grpc, src/http), does not compile:
# - the adapters' folders are not on the core's include path, and a path that climbs out of the
#   core ("../grpc/...") is refused here, at configure time;
# - the wire libraries' headers live in the system include directory, which every target sees,
#   so the core compiles against a folder of same-named headers made here, searched first, each
#   of which stops the compilation with #error.
function(sbx_core_poison target)
  find_path(SBX_GRPC_INCLUDE grpc/grpc.h REQUIRED)
  find_path(SBX_PBC_INCLUDE protobuf-c/protobuf-c.h REQUIRED)
  find_path(SBX_MHD_INCLUDE microhttpd.h REQUIRED)
  find_path(SBX_JANSSON_INCLUDE jansson.h REQUIRED)
  set(poison ${CMAKE_CURRENT_BINARY_DIR}/core-poison)
  file(REMOVE_RECURSE ${poison})
  set(headers microhttpd.h jansson.h jansson_config.h)
  file(GLOB_RECURSE grpc_headers RELATIVE ${SBX_GRPC_INCLUDE} ${SBX_GRPC_INCLUDE}/grpc/*.h)
  file(GLOB_RECURSE pbc_headers RELATIVE ${SBX_PBC_INCLUDE} ${SBX_PBC_INCLUDE}/protobuf-c/*.h)
  foreach(h ${headers} ${grpc_headers} ${pbc_headers})
    file(WRITE ${poison}/${h} "#error \"sandboxd's core knows nothing of the wire: <${h}> \
belongs in an adapter (sandboxd/src/grpc, sandboxd/src/http)\"\n")
  endforeach()
  target_include_directories(${target} BEFORE PRIVATE ${poison})

  get_target_property(sources ${target} SOURCES)
  file(GLOB_RECURSE core_headers ${CMAKE_CURRENT_SOURCE_DIR}/src/core/*.h)
  foreach(f ${sources} ${core_headers})
    if(NOT IS_ABSOLUTE ${f})
      set(f ${CMAKE_CURRENT_SOURCE_DIR}/${f})
    endif()
    file(STRINGS ${f} climbs REGEX "^[ \t]*#[ \t]*include[ \t]*\"[.][.]/")
    if(climbs)
      message(FATAL_ERROR "${f}: a core source includes a header outside the core: ${climbs}")
    endif()
  endforeach()
endfunction()

# The rule, tested: a source that includes a header of each wire library, compiled as the core
# compiles, is stopped by the poisoned header (the tests fail if the core could include it).
function(sbx_core_poison_tests target)
  foreach(h grpc/grpc.h protobuf-c/protobuf-c.h microhttpd.h jansson.h)
    string(MAKE_C_IDENTIFIER ${h} name)
    set(probe ${CMAKE_CURRENT_BINARY_DIR}/core-poison-probe-${name}.c)
    file(WRITE ${probe} "#include <${h}>\nint sbx_probe(void);\nint sbx_probe(void) { return 0; }\n")
    add_test(NAME layers_core_refuses_${name}
             COMMAND ${CMAKE_C_COMPILER} "-I$<JOIN:$<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>,;-I>"
                     -fsyntax-only ${probe}
             COMMAND_EXPAND_LISTS)
    set_tests_properties(layers_core_refuses_${name} PROPERTIES LABELS unit
      PASS_REGULAR_EXPRESSION "sandboxd's core knows nothing of the wire: <${h}>")
  endforeach()
endfunction()
