#!/usr/bin/env python3
"""Server-side cost of the counting scripts, per hit, measured in Redis itself (INFO commandstats).

Usage (against a private, empty redis-server: it runs FLUSHALL and CONFIG RESETSTAT):
    redis-server --port 6399 --save '' &
    crates/counter/benches/lua_server_time.py 6399

Each case sends 200 EVALSHA calls of 50 (rule, group) pairs x 20 hits (1,000 hits a call, like a hot batch):
fixed_window.lua (never fires), sliding_window.lua (threshold 100), unique_users.lua fixed (threshold
1,000,000: every user is kept) and sliding (threshold 100), with distinct event ids and, for the unique-users
cases, mostly distinct users. Prints microseconds of server time per hit. Needs only redis-cli.
"""
import os
import subprocess
import sys

LUA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lua")
PAIRS, PER, CALLS = 50, 20, 200


def resp(args):
    out = [f"*{len(args)}\r\n"]
    for a in args:
        b = str(a).encode()
        out.append(f"${len(b)}\r\n{b.decode()}\r\n")
    return "".join(out)


def commands(case, sha):
    n = 0
    for _ in range(CALLS):
        if case in ("fixed", "sliding"):
            sufs = ("fx",) if case == "fixed" else ("sl", "slc")
            thr = 1_000_000_000 if case == "fixed" else 100
            keys = [f"b:{{r:g{k}}}:{s}" for k in range(PAIRS) for s in sufs]
            argv = [""]
            for _k in range(PAIRS):
                argv += [thr, 3_600_000, PER] + [f"e{n + i}" for i in range(PER)]
                n += PER
        else:
            mode = case.split("-")[1]
            sufs = ("uf", "ufm") if mode == "fixed" else ("us", "usm")
            thr = 1_000_000 if mode == "fixed" else 100
            keys = [f"b:{{r:g{k}}}:{s}" for k in range(PAIRS) for s in sufs]
            argv = ["", mode]
            for _k in range(PAIRS):
                argv += [thr, 3_600_000, PER]
                for i in range(PER):
                    argv += [f"user-{(n + i * 7) % 100003}", f"e{n + i}"]
                n += PER
        yield resp(["EVALSHA", sha, len(keys)] + keys + argv)


def cli(port, *args, stdin=None):
    return subprocess.run(["redis-cli", "-p", port, *args], input=stdin, capture_output=True,
                          text=True, check=True).stdout


def main():
    port = sys.argv[1] if len(sys.argv) > 1 else "6399"
    scripts = {"fixed": "fixed_window.lua", "sliding": "sliding_window.lua",
               "users-fixed": "unique_users.lua", "users-sliding": "unique_users.lua"}
    for case, file in scripts.items():
        with open(os.path.join(LUA, file)) as f:
            sha = cli(port, "SCRIPT", "LOAD", f.read()).strip()
        cli(port, "FLUSHALL")
        cli(port, "CONFIG", "RESETSTAT")
        cli(port, "--pipe", stdin="".join(commands(case, sha)))
        stat = [l for l in cli(port, "INFO", "commandstats").splitlines() if "evalsha" in l][0]
        usec = float(stat.split("usec=")[1].split(",")[0])
        print(f"{case:14} {usec / (CALLS * PAIRS * PER):6.2f} us/hit")


if __name__ == "__main__":
    main()
