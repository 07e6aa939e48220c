# SPDX-License-Identifier: Apache-2.0
# Run by `conan create .`: builds test_package.cpp against the created wisp package with CMakeDeps
# + CMakeToolchain and runs it (it exits non-zero when a result is wrong). With -o "wisp/*:cuda=True"
# it also builds test_package_cuda.cpp against wisp::cuda on Thrust's CPP device system (needs the
# CUDA toolkit's CCCL, no GPU); with -o "wisp/*:zstd=True" -o "wisp/*:lz4=True", also
# test_package_codecs.cpp against wisp::zstd and wisp::lz4 (the system's libraries).
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
        wisp = self.dependencies["wisp"].options
        tc.cache_variables["WISP_TEST_CUDA"] = bool(wisp.cuda)
        tc.cache_variables["WISP_TEST_CODECS"] = bool(wisp.zstd) and bool(wisp.lz4)
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
            wisp = self.dependencies["wisp"].options
            if wisp.zstd and wisp.lz4:
                self.run(os.path.join(self.cpp.build.bindir, "test_package_codecs"), env="conanrun")
