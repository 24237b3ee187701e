# sandboxd-controller-static: the same controller as one statically linked, stripped file, the
# binary of the controller image (images/controller.Containerfile: FROM scratch, nothing but it
# and a CA bundle). Built from the same static libraries as sandboxd-controller; only the final
# link differs: libcurl and libmicrohttpd as scripts/static-deps.sh builds them (HTTP(S) over
# OpenSSL with c-ares, which resolves names from /etc/resolv.conf and /etc/hosts itself, so no
# NSS module is needed at run time; no HTTPS in libmicrohttpd), Debian's static c-ares, OpenSSL,
# zlib, libyaml and jansson, and glibc's libc.a.
#
# Not built under the sanitizers (ASan cannot be linked statically), nor without those two
# libraries (then images/build.sh bundles the dynamic controller's libraries instead).
if(SANDBOXD_SANITIZE)
  return()
endif()
include(${PROJECT_SOURCE_DIR}/cmake/static_deps.cmake)
pkg_check_modules(CURL_PC REQUIRED libcurl)
file(GLOB SBX_MHD_STATIC "${SBX_STATIC_DEPS}/libmicrohttpd-${MHD_VERSION}-*/lib/libmicrohttpd.a")
file(GLOB SBX_CURL_STATIC "${SBX_STATIC_DEPS}/libcurl-${CURL_PC_VERSION}-*/lib/libcurl.a")
if(NOT SBX_MHD_STATIC OR NOT SBX_CURL_STATIC)
  message(STATUS "sandboxd-controller-static: not built, no libmicrohttpd ${MHD_VERSION} and "
                 "libcurl ${CURL_PC_VERSION} in ${SBX_STATIC_DEPS} (scripts/static-deps.sh)")
  return()
endif()
list(GET SBX_MHD_STATIC 0 SBX_MHD_STATIC)
list(GET SBX_CURL_STATIC 0 SBX_CURL_STATIC)

add_executable(sandboxd-controller-static src/main.c src/http_status.c)
target_compile_options(sandboxd-controller-static PRIVATE ${SBX_WARNINGS} ${SBX_HARDENING})
target_compile_definitions(sandboxd-controller-static PRIVATE
  SANDBOXD_VERSION="${PROJECT_VERSION}" $<TARGET_PROPERTY:sbx_ctrl_core,INTERFACE_COMPILE_DEFINITIONS>)
target_include_directories(sandboxd-controller-static PRIVATE
  $<TARGET_PROPERTY:sbx_ctrl_core,INTERFACE_INCLUDE_DIRECTORIES>
  $<TARGET_PROPERTY:sbx_kube,INTERFACE_INCLUDE_DIRECTORIES>
  $<TARGET_PROPERTY:sbx_common,INTERFACE_INCLUDE_DIRECTORIES>)
# Our own libraries by file, so that the shared libraries their targets carry stay off the link.
add_dependencies(sandboxd-controller-static sbx_ctrl_core sbx_kube sbx_common)
target_link_libraries(sandboxd-controller-static PRIVATE
  $<TARGET_FILE:sbx_ctrl_core> $<TARGET_FILE:sbx_kube> $<TARGET_FILE:sbx_common>
  ${SBX_MHD_STATIC} ${SBX_CURL_STATIC} -lcares -lssl -lcrypto -lz -lyaml -ljansson -lm -pthread)
target_link_options(sandboxd-controller-static PRIVATE -static -Wl,--gc-sections -s)
add_custom_command(TARGET sandboxd-controller-static POST_BUILD
  COMMAND ${CMAKE_COMMAND} -DBIN=$<TARGET_FILE:sandboxd-controller-static>
          -DNAME=sandboxd-controller-static -DBUDGET=8388608
          -P ${PROJECT_SOURCE_DIR}/sandboxd/static_check.cmake
  VERBATIM)
