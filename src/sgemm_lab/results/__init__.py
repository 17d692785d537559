"""Results: the files a step writes (atomically), its log, its outcome (status records), what every step
shares (seeds, the verdict on a list of points, provenance columns), how a result is judged against
float64 (verification) and how repeated timings are summarised (statistics). Below every layer that
measures: nothing here talks to a GPU."""
