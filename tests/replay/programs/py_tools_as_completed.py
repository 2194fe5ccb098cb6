# asyncio.as_completed over six calls sleeping by a random permutation (x 250 ms): the
# completion order is printed with the permutation.
import asyncio
import random

perm = list(range(6))
random.shuffle(perm)
coros = [tools.corpus.sleep_echo.aio({"id": i, "ms": p * 250}) for i, p in enumerate(perm)]
order = []
for fut in asyncio.as_completed(coros):
    order.append((await fut)["id"])
print("perm", perm)
print("completed", order)
