# time.localtime, gmtime, ctime and strftime without a time argument (each reads the clock),
# and asctime of them.
import time

lt = time.localtime()
gt = time.gmtime()
print(tuple(lt)[:6], tuple(gt)[:6])
print(time.ctime())
print(time.strftime("%Y-%m-%dT%H:%M:%S %a %j"), time.asctime(gt))
