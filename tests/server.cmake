# HTTP server tests (label "server"): the real moe-server binary on loopback,
# driven with cpp-httplib, curl and raw sockets (slow, malformed, pipelined
# and half-closed requests: server/test_http_hardening.cpp). Client tests
# (label "client") are in client.cmake.

file(GLOB SERVER_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/server/*.cpp)
add_executable(test_server ${SERVER_TEST_SOURCES})
target_compile_options(test_server PRIVATE ${MOE_WARNINGS})
target_compile_definitions(test_server PRIVATE MOE_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
target_link_libraries(test_server PRIVATE moe_test_support)
add_dependencies(test_server moe-server)
moe_discover_tests(test_server server)
