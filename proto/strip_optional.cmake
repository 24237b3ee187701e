# Copies IN to OUT without proto3 `optional` labels (protoc-c 1.4 cannot read them).
file(READ ${IN} text)
string(REGEX REPLACE "([\n ])optional " "\\1" text "${text}")
file(WRITE ${OUT} "${text}")
