#!/usr/bin/python3
"""A real SMTP server for Klaxon's tests: accepts every message and stores it as one .eml file.

Usage: smtp-sink.py HOST PORT DIR
"""
import asyncio
import os
import sys
import time

from aiosmtpd.controller import Controller


class Store:
    def __init__(self, directory):
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self.seq = 0

    async def handle_DATA(self, server, session, envelope):
        self.seq += 1
        name = "%d-%06d.eml" % (time.time_ns(), self.seq)
        tmp = os.path.join(self.directory, "." + name)
        with open(tmp, "wb") as f:
            f.write(("X-Envelope-From: %s\r\n" % envelope.mail_from).encode())
            f.write(("X-Envelope-To: %s\r\n" % ", ".join(envelope.rcpt_tos)).encode())
            f.write(envelope.original_content or envelope.content)
        os.rename(tmp, os.path.join(self.directory, name))
        return "250 Message accepted for delivery"


def main():
    host, port, directory = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    controller = Controller(Store(directory), hostname=host, port=port)
    controller.start()
    print("smtp-sink listening on %s:%d, storing in %s" % (host, port, directory), flush=True)
    try:
        asyncio.get_event_loop().run_forever()
    finally:
        controller.stop()


if __name__ == "__main__":
    main()
