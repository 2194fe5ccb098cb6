# uuid.uuid4: five ids, their versions and integer forms.
import uuid

ids = [uuid.uuid4() for _ in range(5)]
for u in ids:
    print(u, u.version, u.int % 1000)
str(ids[0])
