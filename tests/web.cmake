# Browser UI tests, label "web" (included by tests/CMakeLists.txt).
#  - "web: bundle is up to date": the committed web/dist/index.html matches the
#    hash of its sources (plain CMake script, no Node).
#  - "web: ui <group>": tests/web/ui.test.mjs drives Debian's chromium through
#    playwright-core against a real `moe-server serve` on a tiny synthetic model
#    made once by the "web: synth model" fixture. They skip (exit 77) when Node,
#    chromium or playwright-core is missing; scripts/setup_test_tools.sh
#    installs them, playwright-core into MOE_TEST_NODE_MODULES.
set(MOE_TEST_NODE_MODULES "${CMAKE_BINARY_DIR}/npm/node_modules" CACHE PATH
    "node_modules folder holding playwright-core (and openai) for the web and client tests")
set(MOE_WEB_MODEL_DIR ${CMAKE_BINARY_DIR}/test-models/web-tiny)
set(MOE_WEB_ARTIFACTS ${CMAKE_BINARY_DIR}/test-artifacts/web)

add_test(NAME "web: bundle is up to date"
         COMMAND ${CMAKE_COMMAND} -DREPO=${CMAKE_SOURCE_DIR} -P ${CMAKE_CURRENT_SOURCE_DIR}/web/check_bundle.cmake)
set_tests_properties("web: bundle is up to date" PROPERTIES LABELS web TIMEOUT 60)

# synth-model refuses to overwrite a folder, so a rerun starts from an empty one.
add_test(NAME "web: synth model"
         COMMAND sh -c "rm -rf \"$1\" && exec \"$0\" synth-model --preset tiny --out \"$1\""
                 $<TARGET_FILE:moe-server> ${MOE_WEB_MODEL_DIR})
set_tests_properties("web: synth model" PROPERTIES LABELS web TIMEOUT 300 FIXTURES_SETUP moe_web_model)

find_program(MOE_NODE_EXECUTABLE NAMES node nodejs)
foreach(group chat stop experts experts-cpu errors tools)
  if(MOE_NODE_EXECUTABLE)
    set(command ${MOE_NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/web/ui.test.mjs ${group})
  else()
    set(command sh -c "echo 'SKIP: node not found'; exit 77")
  endif()
  add_test(NAME "web: ui ${group}" COMMAND ${command})
  # Each group starts Chromium and a server: 6-21 s, so also labelled slow (scripts/test.sh --quick skips them).
  set_tests_properties("web: ui ${group}" PROPERTIES
    LABELS "web;slow"
    TIMEOUT 600
    SKIP_RETURN_CODE 77
    FIXTURES_REQUIRED moe_web_model
    ENVIRONMENT "NODE_PATH=${MOE_TEST_NODE_MODULES};MOE_SERVER=$<TARGET_FILE:moe-server>;MOE_WEB_MODEL=${MOE_WEB_MODEL_DIR};MOE_WEB_ARTIFACTS=${MOE_WEB_ARTIFACTS}")
endforeach()
