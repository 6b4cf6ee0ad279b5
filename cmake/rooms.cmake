# The rooms of moe-server and the one graph of their dependencies.
#
# A room is one CMake target and the folders (or single files) whose code it
# holds: cpu_kernels/ is moe_cpu_kernels, engine/'s folders are moe_formats,
# moe_text, moe_model, moe_state, moe_devices and moe_engine (runtime/),
# server/ is moe_server_lib, apps/ without main.cpp is
# moe_cli, apps/main.cpp is the moe-server executable (and cmake/'s two
# files are the embedding tool and moe_assets). A room's DEPS are the
# rooms its code may include (and, through them, what those reach); they are
# also exactly the project targets it links: each module's CMakeLists.txt takes
# its sources (moe_room_sources) and its links and include folders
# (moe_room_link) from this table, and moe_rooms_verify() fails the configure
# when a room target links another room that its DEPS do not name. This file is
# the graph: scripts/check_rooms.cmake (`cmake -P`, the first step of
# scripts/test.sh) fails on any #include of a repository file that leaves it,
# and on a file in no room. Rooms are declared in dependency order (a DEPS entry names a room
# declared above it), so the graph has no cycle. tests/ is no room: tests may
# include any room.
#
# moe_room(NAME
#   [DIRS folder...]          folders, relative to the repository root, not
#                             recursive: their .h/.cpp/.cu files are the room's
#   [FILES file...]           single files of the room (moe-server: main.cpp)
#   [EXCLUDE file...]         files of DIRS that are another room's
#   [INCLUDE_DIRS folder...]  folders whose headers are included by bare name
#                             (the room's target exports them); every room's
#                             headers are also included from the repository root
#   [DEPS room...]            the rooms it includes and links
#   [EXTERNAL target...]      third-party targets it links (its optional or
#                             private ones stay in its CMakeLists.txt)
#   [ONLY_IF variable])       its target is built only where the variable is
#                             true (CUDA); a room depending on it then links it
#                             only there
# Works in a project and in script mode (cmake -P): it only records the room
# (global properties MOE_ROOMS, MOE_ROOM_<name>_<field>) and checks the table.
function(moe_room name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "ONLY_IF" "DIRS;FILES;EXCLUDE;INCLUDE_DIRS;DEPS;EXTERNAL")
  get_filename_component(root "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/.." ABSOLUTE)
  set(where "cmake/rooms.cmake: room ${name}")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "${where}: unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  get_property(rooms GLOBAL PROPERTY MOE_ROOMS)
  if(name IN_LIST rooms)
    message(FATAL_ERROR "${where}: declared twice")
  endif()
  if(NOT ARG_DIRS AND NOT ARG_FILES)
    message(FATAL_ERROR "${where}: neither DIRS nor FILES")
  endif()
  foreach(path IN LISTS ARG_DIRS ARG_INCLUDE_DIRS)
    if(NOT IS_DIRECTORY "${root}/${path}")
      message(FATAL_ERROR "${where}: ${path} is not a folder of the repository")
    endif()
  endforeach()
  foreach(path IN LISTS ARG_FILES ARG_EXCLUDE)
    if(NOT EXISTS "${root}/${path}" OR IS_DIRECTORY "${root}/${path}")
      message(FATAL_ERROR "${where}: ${path} is not a file of the repository")
    endif()
  endforeach()
  foreach(path IN LISTS ARG_EXCLUDE)
    get_filename_component(dir "${path}" DIRECTORY)
    if(NOT dir IN_LIST ARG_DIRS)
      message(FATAL_ERROR "${where}: EXCLUDE ${path} is not in its DIRS")
    endif()
  endforeach()
  # Each folder and file is one room's: a file of FILES in another room's
  # folder is in that room's EXCLUDE.
  foreach(other IN LISTS rooms)
    get_property(other_dirs GLOBAL PROPERTY MOE_ROOM_${other}_DIRS)
    get_property(other_files GLOBAL PROPERTY MOE_ROOM_${other}_FILES)
    get_property(other_exclude GLOBAL PROPERTY MOE_ROOM_${other}_EXCLUDE)
    foreach(path IN LISTS ARG_DIRS ARG_FILES)
      if(path IN_LIST other_dirs OR path IN_LIST other_files)
        message(FATAL_ERROR "${where}: ${path} is already room ${other}'s")
      endif()
    endforeach()
    foreach(path IN LISTS ARG_FILES)
      get_filename_component(dir "${path}" DIRECTORY)
      if(dir IN_LIST other_dirs AND NOT path IN_LIST other_exclude)
        message(FATAL_ERROR "${where}: ${path} is in room ${other}'s folder ${dir} and not in its EXCLUDE")
      endif()
    endforeach()
    foreach(path IN LISTS other_files)
      get_filename_component(dir "${path}" DIRECTORY)
      if(dir IN_LIST ARG_DIRS AND NOT path IN_LIST ARG_EXCLUDE)
        message(FATAL_ERROR "${where}: ${dir} holds room ${other}'s ${path}, which its EXCLUDE does not name")
      endif()
    endforeach()
  endforeach()
  # What the room may include: itself, its DEPS and all they reach.
  set(reach "")
  foreach(dep IN LISTS ARG_DEPS)
    if(NOT dep IN_LIST rooms)
      message(FATAL_ERROR "${where}: DEPS ${dep} is not a room declared above it")
    endif()
    get_property(dep_reach GLOBAL PROPERTY MOE_ROOM_${dep}_REACH)
    list(APPEND reach ${dep} ${dep_reach})
  endforeach()
  list(REMOVE_DUPLICATES reach)
  set_property(GLOBAL APPEND PROPERTY MOE_ROOMS ${name})
  foreach(field DIRS FILES EXCLUDE INCLUDE_DIRS DEPS EXTERNAL ONLY_IF)
    set_property(GLOBAL PROPERTY MOE_ROOM_${name}_${field} ${ARG_${field}})
  endforeach()
  set_property(GLOBAL PROPERTY MOE_ROOM_${name}_REACH ${reach})
endfunction()

# The room's sources (absolute paths into VAR): the .cpp and .cu files of its
# DIRS and FILES, less EXCLUDE. Configure mode.
function(moe_room_sources name var)
  get_filename_component(root "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/.." ABSOLUTE)
  _moe_room_get(${name})
  set(sources "")
  foreach(dir IN LISTS room_DIRS)
    file(GLOB found CONFIGURE_DEPENDS "${root}/${dir}/*.cpp" "${root}/${dir}/*.cu")
    list(APPEND sources ${found})
  endforeach()
  foreach(file IN LISTS room_FILES)
    if(file MATCHES "\\.(cpp|cu)$")
      list(APPEND sources "${root}/${file}")
    endif()
  endforeach()
  foreach(file IN LISTS room_EXCLUDE)
    list(REMOVE_ITEM sources "${root}/${file}")
  endforeach()
  set(${var} ${sources} PARENT_SCOPE)
endfunction()

# Links the room's target as the table says: its DEPS (those built in this
# configuration) and EXTERNAL targets, PUBLIC for a library (PRIVATE for an
# executable), and the repository root and its INCLUDE_DIRS as its include
# folders. Call it once the DEPS' targets exist (add_subdirectory in
# dependency order). Configure mode.
function(moe_room_link name)
  get_filename_component(root "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/.." ABSOLUTE)
  _moe_room_get(${name})
  if(NOT TARGET ${name})
    message(FATAL_ERROR "moe_room_link(${name}): no such target")
  endif()
  get_target_property(type ${name} TYPE)
  set(scope PUBLIC)
  if(type STREQUAL "EXECUTABLE")
    set(scope PRIVATE)
  endif()
  set(links "")
  foreach(dep IN LISTS room_DEPS)
    get_property(only_if GLOBAL PROPERTY MOE_ROOM_${dep}_ONLY_IF)
    if(only_if)
      if(NOT ${only_if})
        continue()
      endif()
    endif()
    if(NOT TARGET ${dep})
      message(FATAL_ERROR "moe_room_link(${name}): room ${dep} has no target yet (add its folder first)")
    endif()
    list(APPEND links ${dep})
  endforeach()
  set(include_dirs "${root}")
  foreach(dir IN LISTS room_INCLUDE_DIRS)
    list(APPEND include_dirs "${root}/${dir}")
  endforeach()
  target_include_directories(${name} ${scope} ${include_dirs})
  if(links OR room_EXTERNAL)
    target_link_libraries(${name} ${scope} ${links} ${room_EXTERNAL})
  endif()
  set_property(GLOBAL PROPERTY MOE_ROOM_${name}_LINKED ON)
endfunction()

# After every module's folder: each room built in this configuration has its
# target, linked by moe_room_link, and links no room that its DEPS do not
# name (a target_link_libraries by hand cannot add an edge to the graph).
function(moe_rooms_verify)
  get_property(rooms GLOBAL PROPERTY MOE_ROOMS)
  foreach(name IN LISTS rooms)
    _moe_room_get(${name})
    if(room_ONLY_IF)
      if(NOT ${room_ONLY_IF})
        continue()
      endif()
    endif()
    get_property(linked GLOBAL PROPERTY MOE_ROOM_${name}_LINKED)
    if(NOT TARGET ${name} OR NOT linked)
      message(FATAL_ERROR "cmake/rooms.cmake: room ${name} has no target linked by moe_room_link(${name})")
    endif()
    get_target_property(items ${name} LINK_LIBRARIES)
    get_target_property(interface_items ${name} INTERFACE_LINK_LIBRARIES)
    foreach(item IN LISTS items interface_items)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
      if(item IN_LIST rooms AND NOT item IN_LIST room_DEPS)
        message(FATAL_ERROR "cmake/rooms.cmake: ${name} links room ${item}, which its DEPS do not name")
      endif()
    endforeach()
  endforeach()
endfunction()

# room_<FIELD> in the caller's scope for each field of room NAME.
macro(_moe_room_get name)
  get_property(_moe_rooms GLOBAL PROPERTY MOE_ROOMS)
  if(NOT "${name}" IN_LIST _moe_rooms)
    message(FATAL_ERROR "${name} is not a room of cmake/rooms.cmake")
  endif()
  foreach(_moe_field DIRS FILES EXCLUDE INCLUDE_DIRS DEPS EXTERNAL ONLY_IF REACH)
    get_property(room_${_moe_field} GLOBAL PROPERTY MOE_ROOM_${name}_${_moe_field})
  endforeach()
endmacro()

# ---- The table, in dependency order -----------------------------------------
# The project's base library: the one error type, file reading and atomic
# writing, the one bounded JSON parser, UTF-8. Includes no other room.
moe_room(moe_base DIRS base EXTERNAL nlohmann_json::nlohmann_json)
# The build-time tool that writes the embedded files' byte arrays.
moe_room(moe_embed_tool FILES cmake/embed_tool.cpp)
# Files compiled into the binary (sources generated by cmake/embed.cmake);
# its header is included by bare name.
moe_room(moe_assets FILES cmake/embedded_files.h INCLUDE_DIRS cmake)
moe_room(moe_cpu_kernels DIRS cpu_kernels EXTERNAL Threads::Threads)
moe_room(moe_profiles DIRS profiles DEPS moe_base EXTERNAL nlohmann_json::nlohmann_json)
moe_room(moe_placement DIRS placement DEPS moe_profiles)
# The CUDA kernels share the CPU kernels' element types and block decoders
# (cpu_kernels/dtype.h, bf16.h, quant.h).
moe_room(moe_gpu_kernels DIRS gpu_kernels DEPS moe_cpu_kernels EXTERNAL CUDA::cudart CUDA::cublas
  ONLY_IF MOE_HAVE_CUDA)
moe_room(moe_formats DIRS engine/formats DEPS moe_base moe_cpu_kernels)
moe_room(moe_text DIRS engine/text DEPS moe_base moe_formats moe_assets
  EXTERNAL nlohmann_json::nlohmann_json PkgConfig::SENTENCEPIECE PkgConfig::PCRE2 PkgConfig::UTF8PROC)
moe_room(moe_model DIRS engine/model DEPS moe_base moe_cpu_kernels moe_formats moe_text moe_profiles moe_assets
  EXTERNAL nlohmann_json::nlohmann_json Threads::Threads)
moe_room(moe_chat DIRS chat DEPS moe_base moe_text moe_model EXTERNAL nlohmann_json::nlohmann_json)
# What a sequence keeps between forward passes (SequenceState, the paged
# KvCache, the state a config's mixers need) and a pass's Batch: below the
# devices, whose backends compute in it, and the runtime, which owns it.
moe_room(moe_state DIRS engine/state DEPS moe_base moe_model)
# Where each op and expert runs: the Backend seam and its CPU and CUDA
# backends, expert executors and devices, the device setup, calibration.
moe_room(moe_devices DIRS engine/devices
  DEPS moe_base moe_cpu_kernels moe_model moe_state moe_placement moe_profiles moe_gpu_kernels
  EXTERNAL nlohmann_json::nlohmann_json Threads::Threads)
# A request through the model: Session, the forward pass and its token
# mixers, sampling, beam search, remembered replies.
moe_room(moe_engine DIRS engine/runtime
  DEPS moe_base moe_cpu_kernels moe_model moe_text moe_state moe_devices moe_placement moe_profiles
  EXTERNAL nlohmann_json::nlohmann_json Threads::Threads)
moe_room(moe_server_lib DIRS server DEPS moe_base moe_engine moe_chat moe_assets
  EXTERNAL PkgConfig::CPP_HTTPLIB)
moe_room(moe_cli DIRS apps EXCLUDE apps/main.cpp DEPS moe_base moe_server_lib)
moe_room(moe-server FILES apps/main.cpp DEPS moe_base moe_cli)
