-- Where a text starts in another: nil when it is not there.
return string.find(ARGV[1], ARGV[2], 1, true)
