# sandboxd-static: the same daemon as one self-contained, stripped, statically linked file, the
# binary that is injected into images of any kind (Debian, Alpine, distroless, scratch). Built
# from the same static libraries of the core and adapters as `sandboxd`; only the final link
# differs: Debian's static archives (libgrpc_unsecure.a, libupb.a, c-ares, re2,
# address_sorting, abseil, zlib, protobuf-c, libmicrohttpd, jansson, libcrypto, nghttp2) and glibc's
# libc.a. glibc's getaddrinfo is linked in (gRPC resolves its listen addresses with it), but a
# numeric address never reaches NSS, so no libnss_* module or /etc file is needed at run time;
# the tests in test/image run the binary in a tree that holds nothing else.
#
# Not built under the sanitizers (ASan cannot be linked statically).
# Why it is not built, when it is not: test/image reports it as the reason for its skips.
if(SANDBOXD_SANITIZE)
  set_property(GLOBAL PROPERTY SBX_STATIC_MISSING "not built in a sanitizer build")
  return()
endif()

# Debian's libmicrohttpd.a is built with HTTPS and needs gnutls, whose static link needs p11-kit,
# of which Debian ships no static archive. scripts/static-deps.sh (run by scripts/setup.sh)
# builds the same Debian source version without HTTPS into a per-machine cache; without it the
# target is skipped, with a message.
include(${PROJECT_SOURCE_DIR}/cmake/static_deps.cmake)
file(GLOB SBX_MHD_STATIC "${SBX_STATIC_DEPS}/libmicrohttpd-${MHD_VERSION}-*/lib/libmicrohttpd.a")
if(NOT SBX_MHD_STATIC)
  set(why "no libmicrohttpd ${MHD_VERSION} without HTTPS in ${SBX_STATIC_DEPS} "
          "(scripts/static-deps.sh builds it)")
  string(JOIN "" why ${why})
  message(STATUS "sandboxd-static: not built, ${why}")
  set_property(GLOBAL PROPERTY SBX_STATIC_MISSING "not built: ${why}")
  return()
endif()
list(GET SBX_MHD_STATIC 0 SBX_MHD_STATIC)

# The private dependencies of the others, as pkg-config --static lists them, and what Debian's
# grpc_unsecure.pc leaves out (upb, c-ares, re2, address_sorting). A library the core or the
# adapters start to use goes here too.
pkg_check_modules(GRPC_STATIC REQUIRED grpc_unsecure gpr zlib)
pkg_check_modules(SUPPORT_STATIC REQUIRED jansson libprotobuf-c libcrypto libseccomp libnghttp2)

set(SBX_STATIC_LIBS -Wl,--start-group ${GRPC_STATIC_STATIC_LIBRARIES} upb cares re2 address_sorting
    ${SUPPORT_STATIC_STATIC_LIBRARIES} -Wl,--end-group)
list(TRANSFORM SBX_STATIC_LIBS PREPEND -l REGEX "^[^-]")
list(REMOVE_DUPLICATES SBX_STATIC_LIBS)

add_executable(sandboxd-static src/main.c)
target_compile_options(sandboxd-static PRIVATE ${SBX_WARNINGS} ${SBX_HARDENING})
target_compile_definitions(sandboxd-static PRIVATE SANDBOXD_VERSION="${PROJECT_VERSION}")
target_include_directories(sandboxd-static PRIVATE
  $<TARGET_PROPERTY:sbx_e2b,INTERFACE_INCLUDE_DIRECTORIES>
  $<TARGET_PROPERTY:sbx_grpc,INTERFACE_INCLUDE_DIRECTORIES>
  $<TARGET_PROPERTY:sbx_http,INTERFACE_INCLUDE_DIRECTORIES>
  $<TARGET_PROPERTY:sbx_core,INTERFACE_INCLUDE_DIRECTORIES>
  $<TARGET_PROPERTY:sbx_proto,INTERFACE_INCLUDE_DIRECTORIES>
  $<TARGET_PROPERTY:sbx_common,INTERFACE_INCLUDE_DIRECTORIES>)
# Our own libraries by file, so that the shared libraries their targets carry stay off the link.
add_dependencies(sandboxd-static sbx_e2b sbx_grpc sbx_http sbx_core sbx_proto sbx_common)
target_link_libraries(sandboxd-static PRIVATE
  $<TARGET_FILE:sbx_e2b> $<TARGET_FILE:sbx_grpc> $<TARGET_FILE:sbx_http> $<TARGET_FILE:sbx_proto>
  $<TARGET_FILE:sbx_core> $<TARGET_FILE:sbx_common> ${SBX_MHD_STATIC} ${SBX_STATIC_LIBS} -lstdc++ -lm -pthread)
target_link_options(sandboxd-static PRIVATE -static -Wl,--gc-sections -s
  -Wl,-Map=${CMAKE_CURRENT_BINARY_DIR}/sandboxd-static.map)

# Guard and record: static indeed, and its size, which is tracked (goal: 8 MiB at most).
add_custom_command(TARGET sandboxd-static POST_BUILD
  COMMAND ${CMAKE_COMMAND} -DBIN=$<TARGET_FILE:sandboxd-static>
          -P ${CMAKE_CURRENT_SOURCE_DIR}/static_check.cmake
  VERBATIM)
