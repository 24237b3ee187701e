# SBX_STATIC_DEPS: where scripts/static-deps.sh puts the static libraries it builds
# ($SANDBOXD_STATIC_DEPS, else $XDG_CACHE_HOME/sandboxd/static, else ~/.cache/sandboxd/static).
set(SBX_STATIC_DEPS "$ENV{SANDBOXD_STATIC_DEPS}")
if(NOT SBX_STATIC_DEPS)
  set(SBX_STATIC_DEPS "$ENV{HOME}/.cache/sandboxd/static")
  if(DEFINED ENV{XDG_CACHE_HOME})
    set(SBX_STATIC_DEPS "$ENV{XDG_CACHE_HOME}/sandboxd/static")
  endif()
endif()
