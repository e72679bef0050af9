"""The one deepjit library object of flash_mla (its backend table is ``_dispatch.TABLE``)."""
import deepjit

__version__ = "0.1.0+flashmla.2e5429fc"  # the suite's 0.1.0, mirroring upstream FlashMLA's Ascend release (commit 2e5429fc)

LIB = deepjit.KernelLibrary("flash_mla", "FMLA", __file__, __version__)
