# Exceptions caught and printed with their tracebacks' last lines; random choices decide
# which is raised. The program ends ok.
import random
import traceback

kinds = []
for i in range(3):
    try:
        if random.random() < 0.5:
            int("not a number")
        else:
            [][5]
    except Exception as e:
        kinds.append(type(e).__name__)
        print(i, type(e).__name__, e)
        print(traceback.format_exc().strip().splitlines()[-3].strip())
",".join(kinds)
