# from datetime import datetime, date: the same reads through names imported from the module.
from datetime import date, datetime, timedelta, timezone

d = datetime.now()
u = datetime.now(tz=timezone(timedelta(hours=5, minutes=30)))
print(d.strftime("%Y-%m-%d %H:%M:%S.%f"), u.isoformat())
print(date.today().isoformat(), datetime.utcnow().timestamp())
