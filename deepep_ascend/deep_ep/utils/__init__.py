"""Helpers shared by the buffers and upstream's utility modules: ``event``, ``math``, ``envs``
(seeds, ``init_dist``, domain sizes), ``refs`` (reference dispatch/combine), ``gate`` (unbalanced
routing), ``testing`` (timing)."""
