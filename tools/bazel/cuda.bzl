"""cuda_library: compiles .cu files with nvcc and links them like a cc_library.

There are no CUDA rules offline (rules_cuda is a download away), and the native C++ rules
cannot drive nvcc, so this rule runs one nvcc action per .cu (they compile in parallel and
cache separately: a CUTLASS instantiation takes about a minute) and hands the objects to
cc_common, so cc_library/cc_binary targets depend on it as on any C++ library.

Without a CUDA toolkit (HAS_CUDA False) the macro defines an empty, "manual" cc_library instead,
so BUILD files still load and `:all` skips it.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load("@jgg_local_deps//:defs.bzl", "HAS_CUDA")

# sm_90a enables the Hopper-only instructions (wgmma, setmaxnreg) CUTLASS's SM90 kernels need;
# the compute_90 PTX lets newer GPUs JIT the portable code.
CUDA_GENCODE = [
    "-gencode=arch=compute_90a,code=sm_90a",
    "-gencode=arch=compute_90,code=compute_90",
]

# -DNDEBUG matters for speed: without it ptxas serializes CUTLASS's wgmma (warning C7510).
# --objdir-as-tempdir: nvcc names its intermediate files in $TMPDIR after its process id,
# and every sandboxed action runs in its own PID namespace with the same small ids, so two
# concurrent compiles could swap intermediates (seen: one SM90 variant's object held another
# variant's kernels). Beside the object, each action's intermediates have names of their own.
_NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "-DNDEBUG",
    "-Xcompiler",
    "-fPIC",
    "--expt-relaxed-constexpr",
    "--objdir-as-tempdir",
]

_HEADER_EXTENSIONS = ("h", "hh", "hpp", "cuh", "inl", "inc")

def _cuda_library_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    feature_configuration = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    deps = cc_common.merge_cc_infos(cc_infos = [dep[CcInfo] for dep in ctx.attr.deps])
    dep_context = deps.compilation_context

    sources = [f for f in ctx.files.srcs if f.extension == "cu"]
    private_headers = [f for f in ctx.files.srcs if f.extension in _HEADER_EXTENSIONS]
    headers = ctx.files.hdrs + private_headers

    # Same include semantics as the C++ rules: workspace-relative ("xla_plugin/...") from the
    # source and output roots, then the deps' -I and -isystem directories. nvcc has no -iquote,
    # so quote includes become -I.
    root = ctx.label.workspace_root or "."
    include_dirs = [root, ctx.bin_dir.path + "/" + root] + dep_context.quote_includes.to_list()
    include_dirs += dep_context.includes.to_list()
    flags = ["-ccbin", cc_toolchain.compiler_executable] + _NVCC_FLAGS + ctx.attr.gencode
    flags += ["-I" + d for d in _unique(include_dirs)]
    for d in dep_context.system_includes.to_list():
        flags += ["-isystem", d]  # nvcc wants it as two arguments
    flags += ["-D" + d for d in ctx.attr.defines + dep_context.defines.to_list()]
    flags += ctx.attr.copts

    inputs = depset(
        headers + [ctx.file._nvcc_version],
        transitive = [dep_context.headers, cc_toolchain.all_files],
    )
    # Objects mirror the sources' paths below the package, so equal file names in two
    # subdirectories (sm90/x.cu, sm100/x.cu) do not clash.
    package_dir = "/".join([p for p in [ctx.label.workspace_root, ctx.label.package] if p]) + "/"
    # Without variants each source compiles once; with them, once per variant (its own object
    # and -D flags): one template file, many kernel instantiations compiled in parallel.
    variants = ctx.attr.variants or {"": []}
    objects = []
    for src in sources:
        stem = src.path[len(package_dir):] if src.path.startswith(package_dir) else src.basename
        for variant, variant_defines in variants.items():
            suffix = "." + variant if variant else ""
            obj = ctx.actions.declare_file(
                "_objs/%s/%s%s.o" % (ctx.label.name, stem[:-len(".cu")], suffix),
            )
            ctx.actions.run(
                executable = ctx.executable._nvcc,
                arguments = flags + ["-D" + d for d in variant_defines] +
                            ["-c", src.path, "-o", obj.path],
                inputs = depset([src], transitive = [inputs]),
                outputs = [obj],
                mnemonic = "CudaCompile",
                progress_message = "Compiling CUDA %s%s" % (src.short_path, suffix),
                use_default_shell_env = True,  # PATH from --incompatible_strict_action_env
            )
            objects.append(obj)

    # The objects are compiled -fPIC, so they serve as PIC and non-PIC objects alike.
    # alwayslink: kernels are often reached only through registration tables or handler
    # symbols; the linker must not drop them. No shared library of its own is needed.
    compilation_outputs = cc_common.create_compilation_outputs(
        objects = depset(objects),
        pic_objects = depset(objects),
    )
    linking_context, _ = cc_common.create_linking_context_from_compilation_outputs(
        actions = ctx.actions,
        feature_configuration = feature_configuration,
        cc_toolchain = cc_toolchain,
        compilation_outputs = compilation_outputs,
        linking_contexts = [deps.linking_context],
        name = ctx.label.name,
        alwayslink = True,
        disallow_dynamic_library = True,
    )
    own = CcInfo(
        compilation_context = cc_common.create_compilation_context(
            headers = depset(ctx.files.hdrs),
            defines = depset(ctx.attr.defines),
        ),
        linking_context = linking_context,
    )
    return [
        DefaultInfo(files = depset(objects)),
        cc_common.merge_cc_infos(cc_infos = [own, deps]),
    ]

def _unique(items):
    out = []
    for item in items:
        if item not in out:
            out.append(item)
    return out

_cuda_library = rule(
    implementation = _cuda_library_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"] + ["." + e for e in _HEADER_EXTENSIONS]),
        "hdrs": attr.label_list(allow_files = ["." + e for e in _HEADER_EXTENSIONS]),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(doc = "Extra nvcc flags."),
        "defines": attr.string_list(doc = "-D flags for this library and its dependents."),
        "gencode": attr.string_list(default = CUDA_GENCODE),
        "variants": attr.string_list_dict(
            doc = "Variant name -> -D flags: every source is compiled once per variant.",
        ),
        "_nvcc": attr.label(
            default = Label("@jgg_local_deps//:nvcc"),
            allow_single_file = True,
            executable = True,
            cfg = "host",
        ),
        "_nvcc_version": attr.label(
            default = Label("@jgg_local_deps//:nvcc_version.txt"),
            allow_single_file = True,
        ),
        "_cc_toolchain": attr.label(
            default = Label("@bazel_tools//tools/cpp:current_cc_toolchain"),
        ),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
)

def cuda_library(name, srcs = [], hdrs = [], deps = [], copts = [], defines = [], gencode = None,
                 variants = {}, **kwargs):
    """A C++-linkable library of .cu sources (see the file docstring).

    gencode: nvcc -gencode flags; defaults to CUDA_GENCODE (sm_90a code + compute_90 PTX).
    variants: {name: [defines]}: compile every source once per variant, with those defines.
    """
    if not HAS_CUDA:
        tags = kwargs.pop("tags", [])
        native.cc_library(
            name = name,
            tags = tags + ([] if "manual" in tags else ["manual"]),
            **kwargs
        )
        return
    _cuda_library(
        name = name,
        srcs = srcs,
        hdrs = hdrs,
        deps = deps,
        copts = copts,
        defines = defines,
        gencode = CUDA_GENCODE if gencode == None else gencode,
        variants = variants,
        **kwargs
    )
