"""Helpers shared by the buffers: events, math and FP8 casts."""
