# random.random: ten draws of the module's generator, printed in full.
import random

v = [random.random() for _ in range(10)]
print(v)
sum(v)
