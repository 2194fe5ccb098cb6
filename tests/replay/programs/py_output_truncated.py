# Output past the output limit (corpus.json gives --output-limit 64K): ~300 KiB of random
# lines; the host drops what is over and says output_truncated.
import random

for i in range(4000):
    print(i, ("%.17f" % random.random()) * 4)
print("the end, never seen")
