# HTTP server tests (label "server"): the real moe-server binary on loopback,
# driven with cpp-httplib and curl. Client tests (label "client") are in
# client.cmake.

# Debian's cpp-httplib is a compiled library whose header must be used with
# the library's own defines (they change class layouts), so moe_server_lib
# links the pkg-config target. This belongs in server/CMakeLists.txt; it is
# done here, guarded, until that file does it.
if(NOT TARGET PkgConfig::CPP_HTTPLIB)
  pkg_check_modules(CPP_HTTPLIB REQUIRED IMPORTED_TARGET GLOBAL cpp-httplib)
endif()
get_target_property(_moe_server_links moe_server_lib INTERFACE_LINK_LIBRARIES)
if(NOT "PkgConfig::CPP_HTTPLIB" IN_LIST _moe_server_links)
  target_link_libraries(moe_server_lib PUBLIC PkgConfig::CPP_HTTPLIB)
endif()

file(GLOB SERVER_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/server/*.cpp)
add_executable(test_server ${SERVER_TEST_SOURCES})
target_compile_options(test_server PRIVATE ${MOE_WARNINGS})
target_compile_definitions(test_server PRIVATE MOE_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
target_link_libraries(test_server PRIVATE moe_test_support)
add_dependencies(test_server moe-server)
catch_discover_tests(test_server TEST_PREFIX "server: " PROPERTIES LABELS server TIMEOUT 600)
