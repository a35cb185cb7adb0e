# ft_add_strategy(<target> SOURCES a.cpp ...
#                 [NAME <name>]              # file is libft_strategy_<name>.so (default: <target>)
#                 [OUTPUT_DIR <dir>]         # default: FT_PLUGIN_OUTPUT_DIR (the built-in dir)
#                 [COMPILE_DEFINITIONS ...]
#                 [NO_INSTALL])
# Builds one strategy plugin: a MODULE library with hidden visibility (only the
# FT_STRATEGY_PLUGIN alias is exported), linked against ft::core and so against
# the very same LibTorch with the same C++ ABI flag (-D_GLIBCXX_USE_CXX11_ABI
# comes from Torch's target through ft::core), and installed into
# lib/ft/strategies.
#
# The same file serves two callers:
#   - ft's own tree (strategies/*, tests/plugins): FT_PLUGIN_OUTPUT_DIR is set,
#     so plugins land where the host's built-in discovery looks
#     (<exe dir>/../lib/ft/strategies);
#   - third parties, through find_package(ft) (installed as
#     lib/cmake/ft/FtStrategy.cmake): FT_PLUGIN_OUTPUT_DIR is unset and the
#     plugin lands in the calling directory's build dir, ready for
#     `ft run --plugin-dir <that dir>` or FT_PLUGIN_PATH.
function(ft_add_strategy target)
  cmake_parse_arguments(ARG "NO_INSTALL" "NAME;OUTPUT_DIR" "SOURCES;COMPILE_DEFINITIONS" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "ft_add_strategy(${target}): SOURCES is required")
  endif()
  if(NOT TARGET ft::core)
    message(FATAL_ERROR "ft_add_strategy(${target}): no ft::core target; call find_package(ft REQUIRED) first")
  endif()
  if(NOT ARG_NAME)
    set(ARG_NAME ${target})
  endif()
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE ft::core)
  if(ARG_COMPILE_DEFINITIONS)
    target_compile_definitions(${target} PRIVATE ${ARG_COMPILE_DEFINITIONS})
  endif()
  # FT_TORCH_RPATH: a LibTorch outside the system directories (top-level CMakeLists.txt; unset
  # in a third-party project, where the link path below covers it).
  set(_ft_plugin_rpath "$ORIGIN/../.." ${FT_TORCH_RPATH})
  set_target_properties(${target} PROPERTIES
    PREFIX "libft_strategy_"
    OUTPUT_NAME ${ARG_NAME}
    SUFFIX ".so"
    CXX_STANDARD 17
    CXX_STANDARD_REQUIRED ON
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    # Installed into <prefix>/lib/ft/strategies: libft_core.so of the same
    # prefix is in lib/. A third-party plugin installed elsewhere also gets
    # the directories of the libft_core.so and LibTorch it linked (link path).
    INSTALL_RPATH "${_ft_plugin_rpath}"
    INSTALL_RPATH_USE_LINK_PATH ON)
  if(ARG_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIR})
  elseif(DEFINED FT_PLUGIN_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${FT_PLUGIN_OUTPUT_DIR})
  endif()
  # nlohmann::json for the events a strategy reports (ft/observe/strategy_events.h),
  # where the calling project has it (ft's own tree does).
  if(TARGET nlohmann_json::nlohmann_json)
    target_link_libraries(${target} PRIVATE nlohmann_json::nlohmann_json)
  endif()
  if(NOT ARG_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION lib/ft/strategies)
  endif()
endfunction()
