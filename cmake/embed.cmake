# moe_embed_files(TARGET FILES f1 f2 ...): compiles the files into a static
# library as byte arrays. Looked up at run time with embedded_file(name) from
# "embedded_files.h" (name = file name without directories). A small host tool
# writes the arrays, so building never needs xxd or Node. The tool and the
# library are rooms of cmake/rooms.cmake (included before this file).
if(NOT TARGET moe_embed_tool)
  moe_room_sources(moe_embed_tool EMBED_TOOL_SOURCES)
  add_executable(moe_embed_tool ${EMBED_TOOL_SOURCES})
  moe_room_link(moe_embed_tool)
endif()

function(moe_embed_files target)
  cmake_parse_arguments(ARG "" "" "FILES" ${ARGN})
  set(out ${CMAKE_CURRENT_BINARY_DIR}/${target}_embedded.cpp)
  add_custom_command(
    OUTPUT ${out}
    COMMAND moe_embed_tool ${out} ${ARG_FILES}
    DEPENDS moe_embed_tool ${ARG_FILES}
    COMMENT "Embedding ${target}")
  add_library(${target} STATIC ${out})
  # embedded_files.h's folder (cmake/) comes from the room's INCLUDE_DIRS.
  moe_room_link(${target})
endfunction()
# embedded_file() is one function for the whole binary: call this once.
