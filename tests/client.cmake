# Client tests (label "client"): real third-party clients against a running
# moe-server. The official openai npm SDK is installed (not vendored) by
# scripts/setup_test_tools.sh into MOE_TEST_NODE_MODULES, shared with the web
# tests' playwright-core.
set(MOE_TEST_NODE_MODULES "${CMAKE_BINARY_DIR}/npm/node_modules" CACHE PATH
    "node_modules folder holding playwright-core (and openai) for the web and client tests")
find_program(MOE_NODE_EXECUTABLE NAMES node nodejs)
if(NOT MOE_NODE_EXECUTABLE)
  set(MOE_NODE_EXECUTABLE "")
endif()

file(GLOB CLIENT_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/client/*.cpp)
add_executable(test_client ${CLIENT_TEST_SOURCES} ${CMAKE_CURRENT_SOURCE_DIR}/server/server_fixture.cpp)
target_include_directories(test_client PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/server)
target_compile_options(test_client PRIVATE ${MOE_WARNINGS})
target_compile_definitions(test_client PRIVATE
  MOE_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
  MOE_NODE_MODULES="${MOE_TEST_NODE_MODULES}"
  MOE_NODE_EXECUTABLE="${MOE_NODE_EXECUTABLE}")
target_link_libraries(test_client PRIVATE moe_test_support)
add_dependencies(test_client moe-server)
moe_discover_tests(test_client client SPEC "~[gpu]" NO_SLOW)
# The same SDK against a server on a CUDA device: labelled gpu, and
# reported skipped (not passed) where there is none.
moe_discover_tests(test_client gpu SPEC "[gpu]" NO_SLOW PROPERTIES SKIP_REGULAR_EXPRESSION "gpu: skipped")
