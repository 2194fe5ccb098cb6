# pandas sampling through numpy's global generator: DataFrame.sample and a random column.
import numpy as np
import pandas as pd

df = pd.DataFrame({"x": np.arange(12), "y": np.random.rand(12).round(6)})
print(df.sample(5).to_string())
print(df["y"].sum())
