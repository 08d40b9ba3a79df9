"""Print a TCP port of 127.0.0.1 that nobody holds now, from 20000-29999: below Linux's
ephemeral range, so that no socket bound to port 0 meanwhile (another rank's listener, a
client) can be handed it before torchrun's agent binds it as MASTER_PORT."""
import random
import socket

for _ in range(200):
    p = random.randrange(20000, 30000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break
