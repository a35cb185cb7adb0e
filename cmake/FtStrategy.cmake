# ft_add_strategy(<target> SOURCES a.cpp ...
#                 [NAME <name>]              # file is libft_strategy_<name>.so (default: <target>)
#                 [OUTPUT_DIR <dir>]         # default: FT_PLUGIN_OUTPUT_DIR (the built-in dir)
#                 [COMPILE_DEFINITIONS ...]
#                 [NO_INSTALL])
# Builds one strategy plugin: a MODULE library with hidden visibility (only the
# FT_STRATEGY_PLUGIN alias is exported), linked against ft_core and so against
# the very same LibTorch, placed where the host's built-in discovery looks
# (<exe dir>/../lib/ft/strategies) and installed there too.
function(ft_add_strategy target)
  cmake_parse_arguments(ARG "NO_INSTALL" "NAME;OUTPUT_DIR" "SOURCES;COMPILE_DEFINITIONS" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "ft_add_strategy(${target}): SOURCES is required")
  endif()
  if(NOT ARG_NAME)
    set(ARG_NAME ${target})
  endif()
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE ft::core)
  if(ARG_COMPILE_DEFINITIONS)
    target_compile_definitions(${target} PRIVATE ${ARG_COMPILE_DEFINITIONS})
  endif()
  set_target_properties(${target} PROPERTIES
    PREFIX "libft_strategy_"
    OUTPUT_NAME ${ARG_NAME}
    SUFFIX ".so"
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    # Installed plugins sit in lib/ft/strategies; libft_core.so is in lib/.
    INSTALL_RPATH "$ORIGIN/../..")
  if(ARG_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIR})
  elseif(DEFINED FT_PLUGIN_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${FT_PLUGIN_OUTPUT_DIR})
  endif()
  if(NOT ARG_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION lib/ft/strategies)
  endif()
endfunction()
