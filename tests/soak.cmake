# Soak test (label "soak"): the real moe-server under a bounded mixed load of
# 8 clients (tests/soak/). Shares the server tests' fixture.
add_executable(test_soak ${CMAKE_CURRENT_SOURCE_DIR}/soak/test_soak.cpp ${CMAKE_CURRENT_SOURCE_DIR}/server/server_fixture.cpp)
target_compile_options(test_soak PRIVATE ${MOE_WARNINGS})
target_include_directories(test_soak PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/server)
target_link_libraries(test_soak PRIVATE moe_test_support)
add_dependencies(test_soak moe-server)
moe_discover_tests(test_soak soak NO_SLOW)
