"""Offline stand-in for @rules_cc//cc:defs.bzl.

Bazel 4.2.3 would http_archive @rules_cc (its WORKSPACE suffix does), and Debian's
bazel-rules-cc is too new for 4.2.3. All these rules are native in 4.2.3, so forwarding is
enough. Besides cc_library/cc_binary/cc_test, Bazel's own tools/cpp BUILD files (the local C++
toolchain) load cc_toolchain/cc_toolchain_suite from here, and tools/objc loads objc_library.
"""

def cc_library(**kwargs):
    native.cc_library(**kwargs)

def cc_binary(**kwargs):
    native.cc_binary(**kwargs)

def cc_test(**kwargs):
    native.cc_test(**kwargs)

def cc_import(**kwargs):
    native.cc_import(**kwargs)

def cc_toolchain(**kwargs):
    native.cc_toolchain(**kwargs)

def cc_toolchain_suite(**kwargs):
    native.cc_toolchain_suite(**kwargs)

def cc_proto_library(**kwargs):
    native.cc_proto_library(**kwargs)

def objc_library(**kwargs):
    native.objc_library(**kwargs)
