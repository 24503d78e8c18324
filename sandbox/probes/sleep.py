# Sleeps far past the wall limit: must end as `timeout` at the deadline.
import time

time.sleep(1000)
