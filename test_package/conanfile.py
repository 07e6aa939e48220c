# SPDX-License-Identifier: Apache-2.0
# Run by `conan create .`: builds test_package.cpp against the created wisp package with CMakeDeps
# + CMakeToolchain and runs it (it exits non-zero when a result is wrong). With -o "wisp/*:cuda=True"
# it also builds test_package_cuda.cpp against wisp::cuda on Thrust's CPP device system (needs the
# CUDA toolkit's CCCL, no GPU).
import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout


class WispTestConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def generate(self):
        CMakeDeps(self).generate()
        tc = CMakeToolchain(self)
        tc.cache_variables["WISP_TEST_CUDA"] = bool(self.dependencies["wisp"].options.cuda)
        tc.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        if can_run(self):
            self.run(os.path.join(self.cpp.build.bindir, "test_package"), env="conanrun")
            if self.dependencies["wisp"].options.cuda:
                self.run(os.path.join(self.cpp.build.bindir, "test_package_cuda"), env="conanrun")
