"""What the report says of the machine: its CPU, load and the output of shell commands."""

import subprocess


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def loadavg():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def cpu_text():
    flags = sh(
        "grep -m1 -o -w -E 'avx512bw|avx512_bf16|avx2' /proc/cpuinfo | sort -u | tr '\\n' ' '"
    )
    return f"{sh('lscpu | sed -n s/^Model.name:.//p').strip()} ({flags.strip() or 'no AVX2'})"
