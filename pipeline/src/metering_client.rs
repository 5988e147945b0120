//! A Marketplace Metering client that sends what AWS expects (see BUILD-NOTES gotcha).
