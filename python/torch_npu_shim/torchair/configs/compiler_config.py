from collops.compat.torchair import CompilerConfig  # noqa: F401
