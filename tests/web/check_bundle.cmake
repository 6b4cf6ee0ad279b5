# Fails when the committed web/dist/index.html is stale: recomputes the hash
# of the UI sources (web/src/*, web/build.mjs, web/package.json,
# web/package-lock.json) exactly as web/build.mjs does and compares it with the
# one stamped into the bundle. Needs no Node.
# Usage: cmake -DREPO=<repository root> -P tests/web/check_bundle.cmake
if(NOT REPO)
  message(FATAL_ERROR "pass -DREPO=<repository root>")
endif()

file(GLOB_RECURSE files RELATIVE ${REPO} ${REPO}/web/src/*)
list(APPEND files web/build.mjs web/package.json web/package-lock.json)
list(SORT files)
set(manifest "")
foreach(f IN LISTS files)
  if(NOT EXISTS ${REPO}/${f})
    message(FATAL_ERROR "missing ${f}")
  endif()
  file(SHA256 ${REPO}/${f} h)
  string(APPEND manifest "${h}  ${f}\n")
endforeach()
string(SHA256 want "${manifest}")

set(bundle ${REPO}/web/dist/index.html)
if(NOT EXISTS ${bundle})
  message(FATAL_ERROR "web/dist/index.html is missing: run scripts/build_web.sh")
endif()
file(READ ${bundle} head LIMIT 2048)
string(REGEX MATCH "<meta name=\"moe-web-source-hash\" content=\"([0-9a-f]+)\">" found "${head}")
if(NOT found)
  message(FATAL_ERROR "web/dist/index.html carries no moe-web-source-hash: run scripts/build_web.sh")
endif()
if(NOT CMAKE_MATCH_1 STREQUAL want)
  message(FATAL_ERROR "web/dist/index.html is stale (built from sources ${CMAKE_MATCH_1}, sources are now ${want}): "
                      "run scripts/build_web.sh and commit web/dist/index.html")
endif()

# Self-contained: no external script, stylesheet or other resource references.
file(READ ${bundle} html)
if(html MATCHES "<script[^>]* src=|<link[^>]* rel=\"stylesheet\"")
  message(FATAL_ERROR "web/dist/index.html references external scripts or stylesheets")
endif()
message(STATUS "web/dist/index.html is up to date (${want})")
