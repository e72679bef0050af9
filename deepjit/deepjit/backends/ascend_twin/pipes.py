"""The names of the twin runtime's pipes and counted byte routes, in dj_twin/runtime.h order (the launch
counters and the timeline read them by index)."""

# dj_twin/runtime.h pipe_t, in order.
PIPES = ("S", "V", "M", "MTE1", "MTE2", "MTE3", "ALL", "MTE4", "MTE5", "V2", "FIX", "MTE2_L1A", "MTE2_L1B")
# dj_twin/runtime.h Route, in order: the source -> destination of each counted byte.
ROUTES = ("gm_to_ub", "gm_to_l1", "ub_to_gm", "l0c_to_gm", "l0c_to_ub", "ub_to_l1", "l1_to_l0", "l1_to_ub", "fill",
          "simt_gm_load", "simt_gm_store")
GM_READS = ("gm_to_ub", "gm_to_l1")     # the routes that read HBM / L2
GM_WRITES = ("ub_to_gm", "l0c_to_gm")   # the routes that write it
