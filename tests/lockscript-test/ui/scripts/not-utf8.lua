-- not UTF-8: ÿþ
return 1
