# datetime.date.today: the date, its weekday and ordinal, and the days until a fixed date.
import datetime

t = datetime.date.today()
print(t.isoformat(), t.weekday(), t.toordinal(), t.isocalendar()[1])
print("days to 2030-01-01:", (datetime.date(2030, 1, 1) - t).days)
