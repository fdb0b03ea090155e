"""What pyproject.toml cannot yet say without a warning: the optional C extension, and the
.pth file that makes CACHEWATCH_INSTALL=1 work (cachewatch/autoinstall.py).

The cache-hit path of cachewatch.jit in C (cachewatch/capture/_fastcall.c). Optional: without a
compiler the install goes on and cachewatch uses its pure-Python twin. The .pth file
(cachewatch/cachewatch-install.pth) goes to the top of site-packages, where Python reads
it at start, from a wheel and from an editable install alike.
"""

import os
import shutil

from setuptools import Extension, setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = "cachewatch-install.pth"
PTH_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cachewatch", PTH)


class BuildPyWithPth(build_py):
    """The wheel's top level (site-packages once installed) gets the .pth file."""

    def run(self):
        super().run()
        if not getattr(self, "editable_mode", False):
            self.copy_file(PTH_SOURCE, os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        if getattr(self, "editable_mode", False):
            return outputs
        return outputs + [os.path.join(self.build_lib, PTH)]


class EditableWheelWithPth(editable_wheel):
    """pip install -e: the editable wheel's top level gets the .pth file too (the wheel
    holds its unpacked directory's files beside the finder of the sources)."""

    def _run_build_commands(self, dist_name, unpacked_wheel, build_lib, tmp_dir):
        result = super()._run_build_commands(dist_name, unpacked_wheel, build_lib, tmp_dir)
        shutil.copyfile(PTH_SOURCE, os.path.join(unpacked_wheel, PTH))
        return result


setup(
    ext_modules=[Extension("cachewatch.capture._fastcall", sources=["cachewatch/capture/_fastcall.c"], optional=True)],
    cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth},
)
