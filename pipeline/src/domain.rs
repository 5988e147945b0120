//! Pure metering domain: keys, time rules, folds, validation, batching, bisection.
