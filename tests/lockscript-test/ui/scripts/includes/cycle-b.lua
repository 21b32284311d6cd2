local x = 1
--- @include "cycle-a"
