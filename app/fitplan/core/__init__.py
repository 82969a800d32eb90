"""Qt-free core of fitplan: GGUF reading, model profile, estimator, planner, command builder, scanning, hardware."""

from fitplan.core.base import codecache

codecache.install()  # before any of the core's dataclasses: their methods' compiled code is cached (see codecache)
