# Randomness through ordinary code: dataclasses filled by random draws, sorted and printed.
import random
from dataclasses import dataclass


@dataclass(order=True)
class Item:
    weight: float
    name: str


items = sorted(Item(round(random.uniform(0, 100), 4), random.choice(["ant", "bee", "cat", "dog"])) for _ in range(8))
for it in items:
    print(it)
