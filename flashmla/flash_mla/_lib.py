"""The one deepjit library object of flash_mla (its backend table is ``_dispatch.TABLE``)."""
import deepjit

from . import __version__

LIB = deepjit.KernelLibrary("flash_mla", "FMLA", __file__, __version__)
