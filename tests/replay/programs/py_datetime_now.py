# datetime.datetime.now (naive and with a time zone), utcnow and today.
import datetime

now = datetime.datetime.now()
aware = datetime.datetime.now(datetime.timezone.utc)
utc = datetime.datetime.utcnow()
today = datetime.datetime.today()
print(now.isoformat(), aware.isoformat())
print(utc.isoformat(), today.isoformat())
print(isinstance(now, datetime.datetime), (today - now).total_seconds() >= 0, now.microsecond)
