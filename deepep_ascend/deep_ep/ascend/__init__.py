"""deep_ep on Ascend NPUs: the collective transport, the engine behind EPBuffer / Buffer, and the TileLang kernels."""
