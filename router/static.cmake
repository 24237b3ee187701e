# sandboxd-router-static: the same router as one statically linked, stripped file, the binary of
# the router image (images/router.Containerfile: FROM scratch, nothing but it and a CA bundle).
# Built from the same static libraries as sandboxd-router; only the final link differs: gRPC as
# sandboxd-static links it (Debian's static archives), libcurl and libmicrohttpd as
# scripts/static-deps.sh builds them for sandboxd-controller-static (libcurl: HTTP(S) over
# OpenSSL with c-ares, so no NSS module is needed at run time), and glibc's libc.a.
#
# Not built under the sanitizers (ASan cannot be linked statically), nor without those two
# libraries (then images/build.sh bundles the dynamic router's libraries instead).
if(SANDBOXD_SANITIZE)
  return()
endif()
include(${PROJECT_SOURCE_DIR}/cmake/static_deps.cmake)
pkg_check_modules(ROUTER_CURL_PC REQUIRED libcurl)
file(GLOB SBX_ROUTER_MHD "${SBX_STATIC_DEPS}/libmicrohttpd-${ROUTER_MHD_VERSION}-*/lib/libmicrohttpd.a")
file(GLOB SBX_ROUTER_CURL "${SBX_STATIC_DEPS}/libcurl-${ROUTER_CURL_PC_VERSION}-*/lib/libcurl.a")
if(NOT SBX_ROUTER_MHD OR NOT SBX_ROUTER_CURL)
  message(STATUS "sandboxd-router-static: not built, no libmicrohttpd ${ROUTER_MHD_VERSION} and "
                 "libcurl ${ROUTER_CURL_PC_VERSION} in ${SBX_STATIC_DEPS} (scripts/static-deps.sh)")
  return()
endif()
list(GET SBX_ROUTER_MHD 0 SBX_ROUTER_MHD)
list(GET SBX_ROUTER_CURL 0 SBX_ROUTER_CURL)

# gRPC's private dependencies, as pkg-config --static lists them, and what Debian's
# grpc_unsecure.pc leaves out (upb, c-ares, re2, address_sorting), as sandboxd/static.cmake.
pkg_check_modules(ROUTER_GRPC_STATIC REQUIRED grpc_unsecure gpr zlib)
set(SBX_ROUTER_STATIC_LIBS -Wl,--start-group ${ROUTER_GRPC_STATIC_STATIC_LIBRARIES} upb cares re2
    address_sorting -Wl,--end-group)
list(TRANSFORM SBX_ROUTER_STATIC_LIBS PREPEND -l REGEX "^[^-]")
list(REMOVE_DUPLICATES SBX_ROUTER_STATIC_LIBS)

add_executable(sandboxd-router-static src/main.c)
target_compile_options(sandboxd-router-static PRIVATE ${SBX_WARNINGS} ${SBX_HARDENING})
target_compile_definitions(sandboxd-router-static PRIVATE SANDBOXD_VERSION="${PROJECT_VERSION}")
target_include_directories(sandboxd-router-static PRIVATE
  $<TARGET_PROPERTY:sbx_router_core,INTERFACE_INCLUDE_DIRECTORIES>
  $<TARGET_PROPERTY:sbx_kube,INTERFACE_INCLUDE_DIRECTORIES>
  $<TARGET_PROPERTY:sbx_common,INTERFACE_INCLUDE_DIRECTORIES>
  ${ROUTER_GRPC_INCLUDE_DIRS})
# Our own libraries by file, so that the shared libraries their targets carry stay off the link.
add_dependencies(sandboxd-router-static sbx_router_core sbx_kube sbx_common)
target_link_libraries(sandboxd-router-static PRIVATE
  $<TARGET_FILE:sbx_router_core> $<TARGET_FILE:sbx_kube>
  $<TARGET_FILE:sbx_common> ${SBX_ROUTER_MHD} ${SBX_ROUTER_CURL} ${SBX_ROUTER_STATIC_LIBS} -lssl
  -lcrypto -lz -lyaml -ljansson -lstdc++ -lm -pthread)
target_link_options(sandboxd-router-static PRIVATE -static -Wl,--gc-sections -s)
add_custom_command(TARGET sandboxd-router-static POST_BUILD
  COMMAND ${CMAKE_COMMAND} -DBIN=$<TARGET_FILE:sandboxd-router-static>
          -DNAME=sandboxd-router-static -DBUDGET=10485760
          -P ${PROJECT_SOURCE_DIR}/sandboxd/static_check.cmake
  VERBATIM)
